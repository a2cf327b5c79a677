"""Priced columns for joint provisioning: exact solves of usage-capped regions (regions), the method (priced)."""
