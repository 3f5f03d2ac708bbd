"""Part of the monolith package (see monolith/__init__.py)."""
