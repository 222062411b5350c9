package kafka

import (
	"context"
	"sync"

	"github.com/magnetar-io/magnetar/broker"
)

// loadParallel bounds the partitions one request loads, or commits on, at
// a time. Loading a partition (the first produce to it) and a group's first
// commit on it are metadata-store round trips; a request that names
// thousands of new partitions overlaps them instead of queueing them (one
// by one, 10,000 partitions took 30 s to load on the benchmark machine).
const loadParallel = 16

// topicPartition is a partition as a request names it.
type topicPartition struct {
	topic     string
	partition int32
}

// loadPartitions loads, loadParallel at a time, the partitions of tps that
// are not loaded yet, when there are at least two; errors are left to the
// request's own pass over its partitions, which meets them again. It
// returns once every load has finished, so that the request's appends are
// still made in request order.
func (s *Server) loadPartitions(ctx context.Context, tps []topicPartition) {
	if len(tps) < 2 {
		return
	}
	type load struct {
		name      broker.TopicName
		partition int32
	}
	var todo []load
	for _, tp := range tps {
		name, err := s.b.KafkaTopicName(tp.topic)
		if err == nil && !s.b.KafkaPartitionLoaded(name, tp.partition) {
			todo = append(todo, load{name, tp.partition})
		}
	}
	if len(todo) < 2 {
		return
	}
	forEachLimited(len(todo), func(i int) {
		_, _ = s.b.KafkaPartition(ctx, todo[i].name, todo[i].partition)
	})
}

// forEachLimited calls f(0) … f(n-1), loadParallel at a time, and returns
// when all have returned. With n < 2 it calls f on the caller's goroutine.
// A panic in f is raised again on the caller's goroutine, where the
// request handler recovers from it.
func forEachLimited(n int, f func(i int)) {
	if n < 2 {
		for i := range n {
			f(i)
		}
		return
	}
	sem := make(chan struct{}, loadParallel)
	var wg sync.WaitGroup
	var once sync.Once
	var panicked any
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() {
				if r := recover(); r != nil {
					once.Do(func() { panicked = r })
				}
				<-sem
				wg.Done()
			}()
			f(i)
		}()
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}
