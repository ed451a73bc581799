"""How `joulie ... --help` shows an option: its default after the help, unless the help already
says it, and never an internal destination name as the value's placeholder."""

from __future__ import annotations

import argparse

__all__ = ["DefaultsFormatter", "use_everywhere"]


class DefaultsFormatter(argparse.HelpFormatter):
    """``(default: X)`` after each option's help where X is a value a user can read: not for
    flags (off unless given), options without a default, or help that names its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or "default" in text.lower()
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def use_everywhere(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` and every subcommand's parser below it the :class:`DefaultsFormatter`."""
    parser.formatter_class = DefaultsFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                use_everywhere(child)
