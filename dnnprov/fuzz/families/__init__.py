"""The seeded instance families of the certificate fuzzer: spot, serverless, and their shared draws."""
