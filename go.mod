module github.com/spillway-dev/spillway

go 1.26.8
