"""What a person opens: one self-contained report.html per result (compare, the scheduler matrix,
a sweep), layers.csv in the columns of Ascend's msprobe compare, and the helpers the pictures
share (exact zeros on log axes, legends outside the data)."""
