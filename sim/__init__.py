"""The fleet simulator: simulated GPU fleets on virtual time over the production core classes."""
