"""One module per child object kind."""
