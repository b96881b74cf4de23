"""The OAR 2.5 adapter: REST API or commands (here or over SSH), placeholders as container
advance reservations, occupancy from OAR's Gantt."""
