//go:build !race

package entry

const poisonRecycled = false
