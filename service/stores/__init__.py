"""Where word lists live: the embedded store (files) or Redis."""
