"""``python -m llmkit``: the same as the ``llmkit`` command (see ``llmkit.cli``)."""
import sys

from llmkit.cli import main

sys.exit(main())
