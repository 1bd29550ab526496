"""What a person reads: reports, tables and pictures of comparisons and scheduler matrices."""
