"""The permission family: permissions_describe and permissions_check."""
