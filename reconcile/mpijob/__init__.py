"""The MPIJob controller: observe -> decide (pure) -> execute -> remember, over render and the engine."""
