"""Digital twins for tests and benchmarks: EC2 (moto behind a capacity proxy) and a Lambda endpoint.

:mod:`.server` starts the EC2 twin, :mod:`.setup` says what it starts from, :mod:`.ec2_protocol`
speaks EC2's query protocol, :mod:`.replay` runs the loop through boto3 against it, and
:mod:`.lambda_endpoint` answers Lambda's Invoke API with a stand-in λDNN worker.
"""
