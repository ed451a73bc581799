"""Temporary re-export: the catalog lives in :mod:`joulie.hardware.catalog`. Remove once
``joulie.manager.role`` imports it from there."""

from joulie.hardware.catalog import Catalog, CatalogError

__all__ = ["Catalog", "CatalogError"]
