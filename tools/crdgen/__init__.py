"""Builds the MPIJob CustomResourceDefinition from our field definitions and Kubernetes' OpenAPI v3 spec."""
