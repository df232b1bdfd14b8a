"""client-go's parts in Python: API client, informers, work queue, rate limits, leader election and fence,
events, health server. Imports neither render nor the MPIJob controller (the kinds table names what we
write)."""
