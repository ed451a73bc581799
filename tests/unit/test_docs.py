from __future__ import annotations

from pathlib import Path

from joulie.docs import BEGIN, END, render_readme, settings_reference
from joulie.roles import ROLES


def test_readme_settings_table_is_current(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text()
    assert BEGIN in readme
    assert END in readme
    assert render_readme(readme) == readme, "run `make docs` and commit README.md"


def test_reference_documents_every_variable_once() -> None:
    text = settings_reference()
    for spec in ROLES.values():
        for name in spec.settings.model_fields:
            assert text.count(f"| `{spec.settings.env_name(name)}` |") == 1
