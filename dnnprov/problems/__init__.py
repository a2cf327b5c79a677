"""Problem data: the validated spot and serverless problems, validity domains, interruption models."""
