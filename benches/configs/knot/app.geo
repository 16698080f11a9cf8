app.steer.example:
  - geo: "EU"
    A: 198.51.100.1
  - geo: "NA"
    A: 198.51.100.2
  - geo: "AS"
    A: 198.51.100.3
