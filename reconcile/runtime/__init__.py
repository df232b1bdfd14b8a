"""client-go's parts in Python: API client, informers, work queue, the generic controller loop, rate limits,
leader election and fence, events, health server. Names no product: the kinds, user agent, event component
and Lease name of an operator come in from its own package."""
