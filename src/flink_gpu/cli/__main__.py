"""``python -m flink_gpu.cli``: the same as the ``flink-gpu`` command."""

import sys

from flink_gpu.cli import main

sys.exit(main())
