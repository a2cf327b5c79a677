"""Reading and writing: the JSON instance format, catalogs and their import, the papers' embedded data."""
