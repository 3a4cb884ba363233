"""The MySQL / MariaDB backend: in progress; its test server launcher is in :mod:`.server`.

No ``DESCRIPTOR`` yet: the backend registry skips a package without one, so no URL scheme
reaches this package until the backend itself is here.
"""
