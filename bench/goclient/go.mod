module joulie/bench/goclient

go 1.22
