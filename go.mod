module github.com/collplan/collplan

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
