"""One module per ``actkit`` sub-command; see :mod:`actkit.cli`."""
