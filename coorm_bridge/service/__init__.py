"""The service: launcher sessions, passes, polling, the periodic loop, configuration, wiring."""
