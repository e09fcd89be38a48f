"""Which Python warnings reach a user's terminal: ours, not our libraries'.

A library's warning (asyncssh's five ``CryptographyDeprecationWarning: DSA is deprecated``
lines at import with cryptography 51, a dependency's own deprecations) says something to
that library's authors, not to someone running ``dockyard plan``: it only buries the
command's output. Warnings issued from our own packages (a setting we read, a config we
accept with a caveat) still show. Someone who asks for warnings (``python -W ...`` or
``PYTHONWARNINGS``) gets exactly what they asked for: nothing is filtered then.

Called first thing by each entry point a person starts: the ``dockyard`` console script
(``reconciler.cli.main.run``, which also serves ``dockyard server``) and the host agent
(``python -m agent``).
"""

from __future__ import annotations

import sys
import warnings

OUR_PACKAGES = r"(schemas|reconciler|stacks|agent)(\.|$)"


def show_only_our_warnings() -> None:
    """Ignore warnings issued from other packages' code, unless the user chose a filter."""
    if sys.warnoptions:
        return
    warnings.filterwarnings("ignore")
    # inserted in front of the line above, so it is matched first
    warnings.filterwarnings("default", module=OUR_PACKAGES)
