"""A switch's gNMI server, directly or through gnmic and Telegraf: OpenConfig and SR Linux counter
paths assembled into one snapshot per switch per sample, and LLDP neighbours (README.md)."""
