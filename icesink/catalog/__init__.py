"""Catalog configuration and access: the only place that turns typed settings into pyiceberg properties."""

from icesink.catalog.config import CatalogConfig

__all__ = ["CatalogConfig"]
