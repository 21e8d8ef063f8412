"""``python -m trainc`` runs the command-line interface."""

from trainc.cli import main

raise SystemExit(main())
