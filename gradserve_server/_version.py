"""The version of gradserve: the one place it is written. The server's and the client's distributions both
read it (``client/gradserve/_version.py`` is a link to this file), and so does the OpenAPI document."""

__version__ = "0.1.0"
