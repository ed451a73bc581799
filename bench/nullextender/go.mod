module joulie/bench/nullextender

go 1.22
