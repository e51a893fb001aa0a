"""The console's pages, one module per section."""
