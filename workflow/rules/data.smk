# rules for this area are added by its issue
