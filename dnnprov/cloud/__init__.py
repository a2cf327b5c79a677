"""The cloud side: AWS through boto3, launchable exports, re-planning after revocations, trace replay."""
