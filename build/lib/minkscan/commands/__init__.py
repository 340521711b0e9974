"""One module per `minkscan` sub-command; each exposes ``register(subparsers)``."""
