"""gradserve's server distribution: the numpy autograd engine (``gradserve_server.engine``) and the FastAPI
service over it (``gradserve_server.app``). The Python client is the separate ``gradserve`` package."""
