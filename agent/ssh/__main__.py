"""``python -m agent.ssh serve …``: the agent with its embedded SSH server (see `cli`)."""

import sys

from agent.ssh.cli import main

sys.exit(main())
