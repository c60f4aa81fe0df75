module e2e.local/pause

go 1.22
