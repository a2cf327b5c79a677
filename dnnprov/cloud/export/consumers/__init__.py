"""One module per consumer of an exported plan: EC2 launch calls and Lambda settings, SkyPilot, Kueue."""
