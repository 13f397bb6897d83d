"""What people look at: Grafana dashboards and their push, and the offline HTML report."""
