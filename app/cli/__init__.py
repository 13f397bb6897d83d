"""The ``fabricwatch`` command: ``main`` runs one module per subcommand (see ``main.COMMANDS``)."""
