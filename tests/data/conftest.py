"""Fixtures of the data tests."""

import socket

import pytest


@pytest.fixture
def network_attempts(monkeypatch):
  """A list that records every attempt to open a network connection (each one also fails)."""
  attempts = []

  def refuse(self, address, *args, **kwargs):
    del self, args, kwargs
    attempts.append(address)
    raise OSError(f'network access attempted in a test: {address!r}')

  monkeypatch.setattr(socket.socket, 'connect', refuse)
  monkeypatch.setattr(socket.socket, 'connect_ex', refuse)
  return attempts
