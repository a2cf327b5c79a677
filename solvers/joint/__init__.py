"""Joint provisioning of many jobs under shared quotas: the columns, the column model, the method."""
