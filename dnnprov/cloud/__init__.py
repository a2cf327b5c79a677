"""The cloud side: AWS through boto3 (catalogs, launches) and launchable exports of plans."""
