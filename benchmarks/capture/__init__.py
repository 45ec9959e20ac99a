"""The sampler: sockets per connection class, CPU and memory per role."""
