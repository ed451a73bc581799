"""Temporary re-export: the recognition lives in :mod:`joulie.hardware.recognition`. Remove once
``joulie.manager.role`` imports it from there."""

from joulie.hardware.recognition import HardwareView, hardware_view

__all__ = ["HardwareView", "hardware_view"]
