"""Pydantic models of the HTTP API: requests, tensor views, graph views and problems."""
