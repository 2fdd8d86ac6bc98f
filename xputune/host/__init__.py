"""The host view: every read and write of /sys and /proc goes through here.

A view is rooted at the live machine ("/"), at an extracted recording (a directory), or at a
recorded tarball read straight into memory. Discovery code takes a view and never touches the
filesystem itself, so tests run the very same code against fixtures.
"""

from xputune.host.open import open_host
from xputune.host.view import HostView

__all__ = ["HostView", "open_host"]
