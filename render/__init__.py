"""Pure rendering of an MPIJob into its child objects and status. See docs/architecture.md."""
