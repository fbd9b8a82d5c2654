package task

// Create and Update are the lifecycle's primitives, exported to the tests.
var (
	Create = create
	Update = update
)
