"""The OpInfo conformance suite: torch's own op test database (``op_db``) run through the engine and HTTP."""
