"""The control loop's clouds: replayed spot traces and EC2 through boto3, over one capacity rule."""
