//go:build race

package entry

// poisonRecycled: see Recycle. Race builds are the test builds.
const poisonRecycled = true
