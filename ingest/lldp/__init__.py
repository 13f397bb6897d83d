"""Cabling: a host's LLDP neighbours from lldpd (``lldpcli``), and the fabric's links assembled from
every host's and switch's reports (README.md)."""
