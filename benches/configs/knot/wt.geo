wt.steer.example:
  - weight: 90
    A: 192.0.2.100
  - weight: 10
    A: 192.0.2.101
